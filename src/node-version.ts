/**
 * Refuses, before anything else loads, a Node.js older than the one Ordo runs on: the entry points
 * (`dist/src/main.js`, `dist/src/cli/main.js`) import this first, so an old Node stops here, before
 * it creates ORDO_HOME or starts PostgreSQL. Same rule and message as scripts/check-node.cjs (run by
 * the npm scripts and bin/ordo.js before anything is built); keep them in step with package.json
 * `engines`. Written for any Node: no syntax or API newer than the oldest one it refuses.
 */
const MIN_NODE_MAJOR = 24;

const major = Number(process.versions.node.split('.')[0]);
if (major < MIN_NODE_MAJOR) {
  process.stderr.write(
    `Ordo needs Node.js ${MIN_NODE_MAJOR} or newer, found ${process.version} at ${process.execPath}.\n` +
      'Run Ordo through npm (npm start, npm test, npx ordo): `npm ci` installs Node 24 for them (optionalDependencies node-<os>-<arch>).\n',
  );
  process.exit(1);
}

export {};
