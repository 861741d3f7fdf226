/** Unit tests: jsdom, ts-jest, a fake kernel; no JupyterLab server needed. */
module.exports = {
  testEnvironment: 'jsdom',
  roots: ['<rootDir>/src'],
  testMatch: ['**/__tests__/**/*.test.ts'],
  transform: {
    '^.+\\.tsx?$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }]
  },
  setupFiles: ['<rootDir>/src/__tests__/setup.js'],
  moduleFileExtensions: ['ts', 'tsx', 'js', 'json'],
  // Style imports have no meaning in unit tests.
  moduleNameMapper: { '\\.css$': '<rootDir>/src/__tests__/style-stub.js' }
};
