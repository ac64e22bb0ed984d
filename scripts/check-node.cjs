// Fails fast, with a clear message, when Ordo is started on a Node.js older than 24. Run by the npm
// scripts and bin/ordo.js before anything is built; the compiled entry points check the same rule
// in src/node-version.ts.
const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  console.error(
    `Ordo needs Node.js 24 or newer, found ${process.version} at ${process.execPath}.\n` +
      'Run Ordo through npm (npm start, npm test, npx ordo): `npm ci` installs Node 24 for them (optionalDependencies node-<os>-<arch>).',
  );
  process.exit(1);
}
