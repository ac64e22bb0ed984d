import { spawnSync } from 'node:child_process';

/**
 * `it` for a test that needs an external tool (graphviz `dot`, `promtool`), or `it.skip` when the
 * tool is not installed here: then one line on stderr says which test is skipped and why, once per
 * test file rather than once per test. Under CI (the CI variable set) a missing tool is not a
 * reason to skip: the test runs and fails, since .ci/run installs the tools.
 */
export function itWithTool(
  tool: { command: string; versionArgs: string[]; debianPackage: string },
  what: string,
): jest.It {
  if (spawnSync(tool.command, tool.versionArgs, { stdio: 'ignore' }).status === 0) return it;
  if (process.env.CI) return it;
  process.stderr.write(
    `skipped: ${what}: \`${tool.command}\` is not installed (Debian package ${tool.debianPackage}; .ci/run installs it)\n`,
  );
  return it.skip;
}

export const DOT = { command: 'dot', versionArgs: ['-V'], debianPackage: 'graphviz' };
export const PROMTOOL = { command: 'promtool', versionArgs: ['--version'], debianPackage: 'prometheus' };
export const CADDY = { command: 'caddy', versionArgs: ['version'], debianPackage: 'caddy' };
