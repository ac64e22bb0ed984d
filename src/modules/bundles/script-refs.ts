import { BundleError } from './bundle-format';

/**
 * Inlines scripts shipped in a bundle into the DAGs that reference them: a `script` step whose
 * `with.scriptRef` names a path listed in the manifest's `scripts` gets that file's text as
 * `with.code`. The published DAG version is then self-contained (its content hash and the bundle
 * signature cover the code), and workers need nothing but the database to run it.
 */
export function inlineScriptRefs(dagPath: string, raw: unknown, scripts: ReadonlyMap<string, Uint8Array>): unknown {
  if (!isObject(raw) || !Array.isArray(raw.steps)) return raw;
  const steps = raw.steps.map((step: unknown) => {
    if (!isObject(step) || !isObject(step.with) || step.with.scriptRef === undefined) return step;
    const ref = step.with.scriptRef;
    const id = typeof step.id === 'string' ? step.id : '?';
    if (typeof ref !== 'string' || !scripts.has(ref)) {
      throw new BundleError(
        'BUNDLE_SCRIPT_REF_UNKNOWN',
        `${dagPath}: step ${id} references script ${JSON.stringify(ref)}, which the manifest does not ship`,
        422,
      );
    }
    if (step.with.code !== undefined) {
      throw new BundleError('BUNDLE_SCRIPT_REF_CONFLICT', `${dagPath}: step ${id} has both scriptRef and code`, 422);
    }
    const { scriptRef: _ref, ...rest } = step.with;
    return { ...step, with: { ...rest, code: Buffer.from(scripts.get(ref)!).toString('utf8') } };
  });
  return { ...raw, steps };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
