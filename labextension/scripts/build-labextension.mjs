/**
 * Build the federated extension into ../torchdevice_magic/labextension.
 *
 * Prefers the `jupyter-builder` command (Python package `jupyter-builder`,
 * which drives the npm package `@jupyter/builder`). When it is not on PATH --
 * e.g. `.venv/bin/pip install -e . --no-build-isolation` from a shell where
 * the venv is not activated -- it runs @jupyter/builder's own entry point with
 * the @jupyterlab/core-meta installed next to it, which is exactly the
 * command `jupyter-builder build` runs.
 *
 * Usage: node scripts/build-labextension.mjs [--development]
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
const development = process.argv.includes('--development');

function onPath(command) {
  const names = process.platform === 'win32' ? [`${command}.exe`, `${command}.cmd`] : [command];
  for (const dir of (process.env.PATH || '').split(delimiter)) {
    for (const name of names) {
      if (dir && existsSync(join(dir, name))) {
        return join(dir, name);
      }
    }
  }
  return null;
}

function run(command, args) {
  console.log(`> ${[command, ...args].join(' ')}`);
  const result = spawnSync(command, args, { cwd: root, stdio: 'inherit' });
  if (result.error) {
    throw result.error;
  }
  process.exit(result.status ?? 1);
}

const jupyterBuilder = onPath('jupyter-builder');
if (jupyterBuilder) {
  run(jupyterBuilder, ['build', ...(development ? ['--development', 'True'] : []), '.']);
} else {
  const builder = join(root, 'node_modules', '@jupyter', 'builder', 'lib', 'build-labextension.js');
  const coreMeta = join(root, 'node_modules', '@jupyterlab', 'core-meta', 'core.package.json');
  for (const file of [builder, coreMeta]) {
    if (!existsSync(file)) {
      console.error(`${file} is missing: run \`npm install\` in ${root} first.`);
      process.exit(1);
    }
  }
  console.log('jupyter-builder is not on PATH; running @jupyter/builder directly.');
  run(process.execPath, [
    builder,
    '--core-package-file',
    coreMeta,
    ...(development ? ['--development'] : []),
    root
  ]);
}
