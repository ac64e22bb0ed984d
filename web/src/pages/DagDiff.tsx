import { diffLines } from 'diff';
import { api, type DagVersion } from '../api';
import { Link } from '../components/Link';
import { useLoad } from '../components/load';
import { Status } from '../components/Status';
import { dagHref, versionHref } from './Dags';

type Line = { kind: 'same' | 'added' | 'removed'; text: string } | { kind: 'gap'; count: number };

/** Unchanged lines kept around each change; longer unchanged stretches fold into one line. */
const CONTEXT = 3;

/**
 * Line changes between two definitions as the API normalizes them (defaults filled in, keys in one
 * order), each written as indented JSON, so only real changes show.
 */
export function definitionDiff(from: unknown, to: unknown): { lines: Line[]; added: number; removed: number } {
  const lines: Line[] = [];
  let added = 0;
  let removed = 0;
  const parts = diffLines(JSON.stringify(from, null, 2) + '\n', JSON.stringify(to, null, 2) + '\n');
  parts.forEach((part, i) => {
    const texts = part.value.replace(/\n$/, '').split('\n');
    if (part.added || part.removed) {
      const kind = part.added ? 'added' : 'removed';
      if (part.added) added += texts.length;
      else removed += texts.length;
      for (const text of texts) lines.push({ kind, text });
      return;
    }
    const head = i === 0 ? 0 : CONTEXT;
    const tail = i === parts.length - 1 ? 0 : CONTEXT;
    if (texts.length <= head + tail + 1) {
      for (const text of texts) lines.push({ kind: 'same', text });
      return;
    }
    for (const text of texts.slice(0, head)) lines.push({ kind: 'same', text });
    lines.push({ kind: 'gap', count: texts.length - head - tail });
    for (const text of texts.slice(texts.length - tail)) lines.push({ kind: 'same', text });
  });
  return { lines, added, removed };
}

const MARK = { same: '  ', added: '+ ', removed: '- ' } as const;

export function DagDiffPage({ dagId, from, to }: { dagId: string; from: number; to: number }) {
  const valid = Number.isInteger(from) && Number.isInteger(to) && from > 0 && to > 0;
  const { data, error } = useLoad<[DagVersion, DagVersion] | null>(
    () => (valid ? Promise.all([api.dagVersion(dagId, from), api.dagVersion(dagId, to)]) : Promise.resolve(null)),
    [dagId, from, to],
  );
  const diff = data ? definitionDiff(data[0].definition, data[1].definition) : null;
  return (
    <>
      <h1>
        <Link href={dagHref(dagId)}>{dagId}</Link>: v{from} → v{to}
      </h1>
      {!valid && (
        <p role="alert" class="error">
          Name two versions to compare: ?from=1&amp;to=2.
        </p>
      )}
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && diff && (
        <>
          <dl class="facts">
            <dt>From</dt>
            <dd>
              <Link href={versionHref(dagId, from)}>v{from}</Link> <Status status={data[0].status} />{' '}
              <span class="mono">{data[0].contentHash.slice(0, 12)}</span>
            </dd>
            <dt>To</dt>
            <dd>
              <Link href={versionHref(dagId, to)}>v{to}</Link> <Status status={data[1].status} />{' '}
              <span class="mono">{data[1].contentHash.slice(0, 12)}</span>
            </dd>
            <dt>Changes</dt>
            <dd data-testid="diff-summary">
              {diff.added === 0 && diff.removed === 0
                ? 'none: the normalized definitions are the same'
                : `${String(diff.added)} lines added, ${String(diff.removed)} removed`}
            </dd>
          </dl>
          <h2 id="diff-h">Definition</h2>
          <pre class="code diff" tabIndex={0} aria-labelledby="diff-h" data-testid="diff">
            {diff.lines.map((l, i) =>
              l.kind === 'gap' ? (
                <span key={i} class="d-gap">
                  {`… ${String(l.count)} unchanged lines\n`}
                </span>
              ) : (
                <span key={i} class={`d-${l.kind}`} data-change={l.kind}>
                  {MARK[l.kind] + l.text + '\n'}
                </span>
              ),
            )}
          </pre>
          <p class="help">
            Lines starting with + are in v{to} only; lines starting with - are in v{from} only.
          </p>
        </>
      )}
    </>
  );
}
