#!/usr/bin/env node
'use strict';
require('../scripts/check-node.cjs');
const path = require('node:path');
const fs = require('node:fs');
const compiled = path.join(__dirname, '..', 'dist', 'src', 'cli', 'main.js');
if (!fs.existsSync(compiled)) {
  console.error('ordo: not built yet; run `npm run build` in ' + path.join(__dirname, '..'));
  process.exit(1);
}
require(compiled)
  .runCli(process.argv.slice(2))
  .then((code) => process.exit(code));
