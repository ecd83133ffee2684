/**
 * `node dist/scripts/bundle-commands.js`, run by `npm run build` after tsc: replaces each CLI command
 * module in dist/src/cli/commands with one file holding it and every module of ours it imports.
 *
 * Why: Node 20's ESM loader spends about 1 ms per module on resolving, reading and linking it. A cold
 * `weightcast agent` imports ~70 of them (~75 ms of CPU, as much as Node's own start), and on a
 * fan-out sixteen processes start at once on few cores. One file per command takes ~28 ms. One file
 * for the whole CLI is slower than none (it runs every command's top-level code), and esbuild's
 * code splitting gives back the many small modules, so: one bundle per command, loaded only when that
 * command runs (the definitions import it lazily, as before).
 *
 * Route bundles: `agent` and `pull` are the commands a fan-out starts on every host at once, and a
 * command's bundle still came with ~25 files around it (bin, main, io, errors, the definitions, the
 * command-line reader, the bundle's chunks, the lazy modules of its usual route). So each also gets
 * one file from `main` to the end of its usual route: dist/src/cli/route/NAME.cjs, which
 * bin/weightcast.cjs runs for a command line that starts with NAME (and asks for no help). It is a
 * script (CommonJS), not an ES module, because Node 20 keeps V8's compiled code only for scripts:
 * bin/weightcast.cjs compiles it with a code cache beside it (src/cli/route-cache.ts; agent -9 to -14
 * CPU-ms, pull -4). Its lazy imports go through `__routeImport`, which the loader gives it: Node 20
 * drops the dynamic-import callback of a script compiled from a code cache. Every
 * lazy import off that route stays a lazy import of the regular build's module (another command's
 * definition, commander's program, the pull from the origin): a route file holds no code the route
 * does not run. Those modules hold their own copies of what they share with the route; errors stay
 * WeightcastErrors across copies (src/errors.ts marks them). A pull through an agent: 71-76 -> 58-62
 * CPU-ms to its agent's first piece (bench/agent-start.js); in the fan-out ~67 -> ~53 a pull, ~5
 * less an agent (docs/measurements/2026-12-07-route-files.md).
 *
 * What stays as it was:
 *  - the tsc output itself: a build without this step (plain `tsc`) runs the same code, module by module;
 *  - packages (commander, undici, zod) and Node's modules: imported, not copied in;
 *  - files found at run time by a URL relative to their module (worker scripts, the native helper,
 *    package.json): each `import.meta.url` of a copied module is rewritten to that module's own URL,
 *    computed from the bundle's, so they resolve as before wherever the package is installed;
 *  - source maps: each bundle maps back to the TypeScript sources through tsc's maps.
 */

import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type BuildOptions, type OutputFile, type Plugin } from 'esbuild';
import { ROUTES } from './route-modules.js';

const commandsDir = fileURLToPath(new URL('../src/cli/commands/', import.meta.url));
const cliDir = fileURLToPath(new URL('../src/cli/', import.meta.url));
const srcDir = fileURLToPath(new URL('../src/', import.meta.url));

/**
 * Keeps the command definitions out of a command's bundle (the CLI loaded them already; one imports
 * a constant from its definition). Nothing else is shared between bundles: a class such as
 * WeightcastError must be one class wherever a command's errors are made and recognised, so each
 * command's bundle holds every module of ours it uses, and another command's (pull's origin path)
 * as a lazy chunk of its own.
 */
function definitionsStayShared(bundleDir: string): Plugin {
  const definitionsDir = join(cliDir, 'definitions');
  return {
    name: 'definitions-stay-shared',
    setup(builder) {
      builder.onResolve({ filter: /^\./ }, (args) => {
        const path = join(args.resolveDir, args.path);
        if (dirname(path) !== definitionsDir) return undefined;
        return { path: relativeSpecifier(bundleDir, path), external: true };
      });
    },
  };
}

/** `./x.js` or `../y/x.js`: the path from a directory to a file, as an import specifier. */
function relativeSpecifier(fromDir: string, to: string): string {
  const path = relative(fromDir, to).split(sep).join('/');
  return path.startsWith('.') ? path : `./${path}`;
}

/** Rewrites `import.meta.url` in a module copied into a bundle to that module's own URL. */
function ownModuleUrls(bundleDir: string): Plugin {
  return {
    name: 'own-module-urls',
    setup(builder) {
      builder.onLoad({ filter: /\.js$/ }, async (args) => {
        const contents = await readFile(args.path, 'utf8');
        if (!contents.includes('import.meta.url')) return undefined;
        const own = `new URL(${JSON.stringify(relativeSpecifier(bundleDir, args.path))}, import.meta.url).href`;
        return {
          contents: contents.replaceAll('import.meta.url', own),
          loader: 'js',
          resolveDir: dirname(args.path),
        };
      });
    },
  };
}

/** Every bundle: ESM for Node 20, packages imported (not copied in), maps to tsc's sources. */
const COMMON = {
  write: false,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  packages: 'external',
  sourcemap: 'linked',
  logLevel: 'warning',
} as const satisfies BuildOptions;

async function bundleCommands(): Promise<void> {
  const names = (await readdir(commandsDir)).filter((name) => name.endsWith('.js'));
  // Every bundle is built from tsc's modules before any is written over them (commands import others).
  const outputs = [];
  for (const name of names) {
    const entry = join(commandsDir, name);
    const result = await build({
      entryPoints: [entry],
      outdir: commandsDir,
      // A module the command imports lazily stays lazy: it becomes a chunk of its own, loaded when
      // first needed (inlining it would load its packages, zod and undici, at every start).
      splitting: true,
      chunkNames: `${name.slice(0, -'.js'.length)}-[name]-[hash]`,
      ...COMMON,
      plugins: [definitionsStayShared(commandsDir), ownModuleUrls(commandsDir)],
    });
    outputs.push(...result.outputFiles);
  }
  outputs.push(...(await bundleRoutes()), ...(await bundleRouteLoader()));
  for (const file of outputs) {
    await mkdir(dirname(file.path), { recursive: true });
    await writeFile(file.path, file.contents);
  }
}

/** Lazy imports of modules off the route stay lazy imports of the regular build's modules. */
function offRouteStaysLazy(routeDir: string, onRoute: ReadonlySet<string>): Plugin {
  return {
    name: 'off-route-stays-lazy',
    setup(builder) {
      builder.onResolve({ filter: /^\./ }, (args) => {
        if (args.kind !== 'dynamic-import') return undefined;
        const path = join(args.resolveDir, args.path);
        if (onRoute.has(path)) return undefined;
        return { path: relativeSpecifier(routeDir, path), external: true };
      });
    },
  };
}

async function bundleRoutes(): Promise<OutputFile[]> {
  const routeDir = join(cliDir, 'route');
  const outputs: OutputFile[] = [];
  for (const [name, modules] of Object.entries(ROUTES)) {
    const onRoute = new Set(modules.map((module) => join(srcDir, module)));
    const result = await build({
      entryPoints: [join(cliDir, 'main.js')],
      outfile: join(routeDir, `${name}.cjs`),
      ...COMMON,
      format: 'cjs',
      // The script's own URL, from the `__filename` its loader passes (src/cli/route-cache.ts).
      banner: { js: 'const __routeUrl = require("node:url").pathToFileURL(__filename).href;' },
      define: { 'import.meta.url': '__routeUrl' },
      plugins: [offRouteStaysLazy(routeDir, onRoute), ownModuleUrls(routeDir)],
    });
    for (const file of result.outputFiles) {
      outputs.push(file.path.endsWith('.cjs') ? { ...file, contents: routeImports(file) } : file);
    }
  }
  return outputs;
}

/**
 * The route loader (cli/route-cache.js) as a CommonJS file too, route-cache.cjs, which
 * bin/weightcast.cjs requires: a routed start then never sets up the ES module loader. It imports
 * only Node's modules; its dynamic import (the route's lazy modules) stays one.
 */
async function bundleRouteLoader(): Promise<OutputFile[]> {
  const result = await build({
    entryPoints: [join(cliDir, 'route-cache.js')],
    outfile: join(cliDir, 'route-cache.cjs'),
    ...COMMON,
    format: 'cjs',
  });
  return [...result.outputFiles];
}

/**
 * A route script's dynamic imports (`import("...")`, as esbuild prints them) made calls of the
 * loader's `__routeImport`. Anything else that still reads `import(` fails the build: a dynamic
 * import left in a cached script would throw at run time.
 */
function routeImports(file: OutputFile): Uint8Array {
  const text = file.text.replace(/\bimport\(("[^"\n]+")\)/g, '__routeImport($1)');
  const left = /\bimport\(/.exec(text);
  if (left !== null) {
    throw new Error(
      `${file.path}: a dynamic import esbuild printed another way: ${text.slice(left.index, left.index + 80)}`,
    );
  }
  return new TextEncoder().encode(text);
}

await bundleCommands();
