import { z } from 'zod';
import { TaskError } from './errors';
import type { Task } from './protocol';
import { compileSchema } from './schema';
import {
  errorCode,
  TaskExecution,
  type CompiledHandler,
  type HandlerDefinition,
  type TaskContext,
} from './task-execution';

const task = (extra: Partial<Task> = {}): Task => ({
  attemptId: 'a1',
  runId: 'r1',
  stepId: 's1',
  attempt: 2,
  epoch: 7,
  taskType: 'resize',
  inputs: { width: 10 },
  deadline: new Date(Date.now() + 60_000).toISOString(),
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
  dagId: 'd',
  dagVersion: 3,
  ...extra,
});

const compiled = (definition: HandlerDefinition<any, any>): CompiledHandler => ({
  definition,
  input: definition.input ? compileSchema(definition.input, 'input', undefined) : undefined,
});

const run = (definition: HandlerDefinition<any, any>, t = task(), onProgress = jest.fn()) =>
  new TaskExecution(t, compiled(definition), onProgress).execute();

describe('TaskExecution', () => {
  it('posts the handler outputs as succeeded with the epoch, named status and logs', async () => {
    const body = await run({
      run: (input: { width: number }, ctx) => {
        ctx.log('info', 'resizing');
        ctx.setNamedStatus('resized');
        return { width: input.width * 2, at: new Date(0) };
      },
    });
    expect(body).toEqual({
      epoch: 7,
      status: 'succeeded',
      outputs: { width: 20, at: '1970-01-01T00:00:00.000Z' },
      namedStatus: 'resized',
      logs: [{ level: 'info', message: 'resizing' }],
    });
  });

  it('gives the handler the task in its context', async () => {
    let seen: TaskContext | undefined;
    await run({ run: (_i, ctx) => ((seen = ctx), {}) });
    expect(seen).toMatchObject({ attemptId: 'a1', attempt: 2, runId: 'r1', stepId: 's1', dagId: 'd', dagVersion: 3 });
    expect(seen!.deadline).toBeInstanceOf(Date);
    expect(seen!.signal.aborted).toBe(false);
  });

  it('fails invalid_input INPUT_INVALID without running the handler when the input does not match', async () => {
    const handler = jest.fn();
    const body = await run({ input: z.object({ width: z.string() }), run: handler });
    expect(handler).not.toHaveBeenCalled();
    expect(body).toMatchObject({ status: 'failed', error: { class: 'invalid_input', code: 'INPUT_INVALID' } });
    expect(body!.error!.message).toMatch(/width/);
  });

  it('fails with the class and code of a TaskError', async () => {
    const body = await run({
      run: () => {
        throw new TaskError('permanent', 'IMAGE_CORRUPT', 'not a PNG');
      },
    });
    expect(body).toEqual({
      epoch: 7,
      status: 'failed',
      error: { class: 'permanent', code: 'IMAGE_CORRUPT', message: 'not a PNG' },
    });
  });

  it('sends a failure without the named status, with the code in the form the server takes', async () => {
    const body = await run({
      run: (_i, ctx) => {
        ctx.setNamedStatus('half');
        throw new TaskError('transient', 'resize-failed: 3', 'x'.repeat(5_000));
      },
    });
    expect(body).not.toHaveProperty('namedStatus');
    expect(body!.error!.code).toBe('RESIZE_FAILED_3');
    expect(body!.error!.message).toHaveLength(4_096);
    expect(errorCode('9lives')).toBe('LIVES');
    expect(errorCode('--')).toBe('HANDLER_ERROR');
  });

  it('fails transient HANDLER_ERROR on any other exception', async () => {
    const body = await run({
      run: async () => {
        throw new Error('disk full');
      },
    });
    expect(body).toMatchObject({
      status: 'failed',
      error: { class: 'transient', code: 'HANDLER_ERROR', message: 'disk full' },
    });
  });

  it('fails transient HANDLER_ERROR for a thrown value that cannot be made a string, or even inspected', async () => {
    const revoked = Proxy.revocable({}, {});
    revoked.revoke();
    for (const thrown of [Object.create(null), revoked.proxy]) {
      const body = await run({
        run: async () => {
          throw thrown;
        },
      });
      expect(body).toMatchObject({ status: 'failed', error: { class: 'transient', code: 'HANDLER_ERROR' } });
    }
  });

  it('cuts and cleans the text it posts so the server takes it: no half of a surrogate pair, no NUL', async () => {
    const wellFormed = (s: string) => !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);
    const failed = await run({
      run: (_i, ctx) => {
        ctx.log('info', 'x'.repeat(8_191) + '😀');
        ctx.log('warn', 'a\u0000b');
        throw new Error('y'.repeat(4_095) + '😀');
      },
    });
    const message = failed!.error!.message;
    expect([wellFormed(message), message.length <= 4_096, message.startsWith('y'.repeat(4_095))]).toEqual([
      true,
      true,
      true,
    ]);
    expect(failed!.logs!.map((l) => [wellFormed(l.message), l.message.length <= 8_192])).toEqual([
      [true, true],
      [true, true],
    ]);
    expect(failed!.logs![1].message).toBe('a\ufffdb');
    // A lone surrogate of the handler's own is replaced too; a whole pair under the limit is kept.
    const ok = await run({ run: (_i, ctx) => (ctx.log('info', 'a\ud800b 😀'), {}) });
    expect(ok!.logs![0].message).toBe('a\ufffdb 😀');
  });

  it('fails permanent when the handler returns something other than an object', async () => {
    expect(await run({ run: () => 42 })).toMatchObject({ error: { class: 'permanent', code: 'OUTPUT_NOT_OBJECT' } });
    expect(await run({ run: () => ({ n: 1n }) })).toMatchObject({
      error: { class: 'permanent', code: 'OUTPUT_NOT_JSON' },
    });
    expect(await run({ run: () => undefined })).toMatchObject({ status: 'succeeded', outputs: {} });
  });

  it('fails permanent TASK_TYPE_UNKNOWN for a task type without a handler', async () => {
    const body = await new TaskExecution(task(), undefined, jest.fn()).execute();
    expect(body).toMatchObject({ status: 'failed', error: { class: 'permanent', code: 'TASK_TYPE_UNKNOWN' } });
  });

  it('aborts the signal on cancel and yields no result', async () => {
    const exec = new TaskExecution(
      task(),
      compiled({
        run: (_i, ctx) =>
          new Promise((_resolve, reject) =>
            ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error)),
          ),
      }),
      jest.fn(),
    );
    const done = exec.execute();
    exec.cancel('run cancelled');
    expect(exec.signal.aborted).toBe(true);
    await expect(done).resolves.toBeUndefined();
  });

  it('aborts the signal at the deadline and fails transient DEADLINE_EXCEEDED', async () => {
    const body = await run(
      {
        run: (_i, ctx) =>
          new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(new Error('aborted')))),
      },
      task({ deadline: new Date(Date.now() - 1).toISOString() }),
    );
    expect(body).toMatchObject({ status: 'failed', error: { class: 'transient', code: 'DEADLINE_EXCEEDED' } });
  });

  it('never throws from progress: a report that cannot be sent is dropped, its message cut whole', async () => {
    const onProgress = jest.fn((_t: Task, _p?: number, message?: string) => {
      if (message === 'boom') throw new TypeError('Do not know how to serialize a BigInt');
    });
    const body = await run(
      {
        run: (_i, ctx) => {
          ctx.progress(10, 'boom', { n: 1 });
          ctx.progress(20, 'z'.repeat(999) + '😀');
          return { done: true };
        },
      },
      task(),
      onProgress,
    );
    expect(body).toMatchObject({ status: 'succeeded', outputs: { done: true } });
    expect(onProgress).toHaveBeenLastCalledWith(expect.anything(), 20, 'z'.repeat(999), undefined);
  });

  it('passes progress reports on until the task is cancelled', async () => {
    const onProgress = jest.fn();
    let ctx!: TaskContext;
    let finish!: () => void;
    const exec = new TaskExecution(
      task(),
      compiled({ run: (_i, c) => ((ctx = c), new Promise<object>((resolve) => (finish = () => resolve({})))) }),
      onProgress,
    );
    const done = exec.execute();
    await new Promise((r) => setImmediate(r));
    ctx.progress(50, 'half', { frames: 3 });
    exec.cancel('gone');
    ctx.progress(60);
    finish();
    await done;
    expect(onProgress).toHaveBeenCalledTimes(1);
    expect(onProgress).toHaveBeenCalledWith(expect.objectContaining({ attemptId: 'a1' }), 50, 'half', { frames: 3 });
  });
});
