import { DomainError } from '../../src/core/errors/domain-error';
import { canonicalHash } from '../../src/core/json/canonical-json';
import { validateDagDefinition } from '../../src/modules/dags/dag-validation';
import { parseDagYaml } from '../../src/modules/dags/dag-yaml';
import { PluginRegistry } from '../../src/modules/plugins/plugin-registry';
import { fuzzRuns } from '../support/fuzz/http-fuzz';
import { corpusDocument, hostileDocuments, randomDocument, type DagDocument } from '../support/fuzz/dag-documents';
import { runFuzz } from '../support/fuzz/replay';

/**
 * The DAG parser and validator called directly, as the publish route does: parse (JSON or YAML),
 * validate, hash. Every input either yields a definition or a 400 DomainError; nothing else
 * escapes (no RangeError from deep input, no TypeError from odd values), in bounded time. The
 * random documents follow the regression corpus; a failure prints ORDO_FUZZ_SEED and
 * ORDO_FUZZ_PATH (of the shrunk case), which replay it.
 */
const plugins = new PluginRegistry();
/** A hang detector, far above any real parse: the functions are synchronous, so the bound is checked after. */
const HANG_MS = 20_000;

function publish(doc: Pick<DagDocument, 'text' | 'type'>): { ok: true } | { ok: false; error: unknown } {
  try {
    const raw: unknown = doc.type === 'application/yaml' ? parseDagYaml(doc.text) : JSON.parse(doc.text);
    canonicalHash(validateDagDefinition(raw, plugins));
    return { ok: true };
  } catch (e) {
    return { ok: false, error: e };
  }
}

/** A JSON syntax error is the HTTP layer's 400 (MALFORMED_JSON); anything else must be a 4xx DomainError. */
function expectCleanOutcome(doc: Pick<DagDocument, 'name' | 'text' | 'type'>, refuse: boolean): void {
  const started = Date.now();
  const r = publish(doc);
  const elapsed = Date.now() - started;
  expect({ doc: doc.name, hang: elapsed > HANG_MS }).toEqual({ doc: doc.name, hang: false });
  if (r.ok) {
    expect({ doc: doc.name, accepted: true }).toEqual({ doc: doc.name, accepted: !refuse });
    return;
  }
  const e = r.error;
  const jsonSyntax = doc.type === 'application/json' && e instanceof SyntaxError;
  const clean = jsonSyntax || (e instanceof DomainError && e.status >= 400 && e.status < 500);
  expect({
    doc: doc.name,
    error: clean ? 'clean 4xx' : `${(e as Error).name}: ${(e as Error).message?.slice(0, 200)}`,
  }).toEqual({
    doc: doc.name,
    error: 'clean 4xx',
  });
}

describe('DAG parser and validator under hostile documents', () => {
  for (const doc of hostileDocuments()) {
    it(`${doc.refuse ? 'refuses' : 'handles'} ${doc.name} without a crash`, () => {
      expectCleanOutcome(doc, doc.refuse);
    });
  }

  it(`answers ${fuzzRuns(300)} random and truncated documents with a definition or a 400`, async () => {
    await runFuzz({
      fuzzer: 'dag-documents',
      arbitrary: randomDocument,
      runs: fuzzRuns(300),
      fromCorpus: corpusDocument,
      shrink: true,
      check: (doc) => expectCleanOutcome({ ...doc }, false),
    });
  });
});
