// Builds the console into a directory (default: the one pawld embeds,
// server/internal/console/dist): app.js bundled by esbuild from src/, with
// index.html and app.css copied from static/. The output depends only on
// the sources and the pinned esbuild, so the committed bundle can be
// checked: `node console/build.mjs OUT` and compare.
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? join(here, "..", "server", "internal", "console", "dist"));
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(here, "src", "main.ts")],
  outfile: join(out, "app.js"),
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  legalComments: "none",
  charset: "utf8",
  sourcemap: false,
  logLevel: "warning",
  absWorkingDir: resolve(here, ".."),
});
for (const f of ["index.html", "app.css"]) copyFileSync(join(here, "static", f), join(out, f));
