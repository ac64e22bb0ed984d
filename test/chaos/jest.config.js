// The chaos harness (`npm run test:chaos`, `npm run test:chaos:short`): same transform as the
// main suites, its own PostgreSQL and processes (no global setup), one file run in band.
const main = require('../../jest.config.js');
const common = main.projects[0];

module.exports = {
  rootDir: '../..',
  testEnvironment: 'node',
  transform: common.transform,
  transformIgnorePatterns: common.transformIgnorePatterns,
  moduleFileExtensions: common.moduleFileExtensions,
  testMatch: ['<rootDir>/test/chaos/**/*.test.ts'],
  testTimeout: 600_000,
  // Its files (the cells, the backup drill) one after the other: each runs its own processes.
  maxWorkers: 1,
  verbose: true,
  // Keep-alive HTTP sockets to the (now stopped) processes must not hold the run open.
  forceExit: true,
};
