import { inlineScriptRefs } from './script-refs';

const scripts = new Map([['scripts/a.js', Buffer.from('return { a: 1 };')]]);

describe('inlineScriptRefs', () => {
  it('replaces a shipped scriptRef with the file text as code', () => {
    const out = inlineScriptRefs(
      'dags/x.json',
      { id: 'x', steps: [{ id: 's', plugin: 'script', with: { scriptRef: 'scripts/a.js', timeoutMs: 5 } }] },
      scripts,
    );
    expect(out).toEqual({
      id: 'x',
      steps: [{ id: 's', plugin: 'script', with: { code: 'return { a: 1 };', timeoutMs: 5 } }],
    });
  });

  it('refuses a reference to a script the manifest does not ship (422)', () => {
    expect(() =>
      inlineScriptRefs('dags/x.json', { steps: [{ id: 's', with: { scriptRef: '../etc/passwd' } }] }, scripts),
    ).toThrow(expect.objectContaining({ code: 'BUNDLE_SCRIPT_REF_UNKNOWN', status: 422 }));
  });

  it('refuses a step with both scriptRef and code', () => {
    expect(() =>
      inlineScriptRefs('d', { steps: [{ id: 's', with: { scriptRef: 'scripts/a.js', code: 'x' } }] }, scripts),
    ).toThrow(expect.objectContaining({ code: 'BUNDLE_SCRIPT_REF_CONFLICT' }));
  });

  it('leaves steps without scriptRef and non-object documents alone', () => {
    const doc = { steps: [{ id: 'n', plugin: 'noop', with: { output: {} } }] };
    expect(inlineScriptRefs('d', doc, scripts)).toEqual(doc);
    expect(inlineScriptRefs('d', 'text', scripts)).toBe('text');
  });
});
