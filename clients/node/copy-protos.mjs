#!/usr/bin/env node
// Copies the repository's .proto files into this package (proto/), so that the
// tarball `npm pack` makes is a client on its own: Turnwire's contract
// (proto/turnwire/**) and the vendored google/rpc protos with their licence
// (proto/vendor/). npm runs it before packing (prepack) and `--clean` after
// (postpack), so a checkout keeps loading ../../proto directly.
import { cpSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const source = path.resolve(here, "../../proto");
const target = path.join(here, "proto");

rmSync(target, { recursive: true, force: true });
if (process.argv[2] !== "--clean") {
  cpSync(path.join(source, "turnwire"), path.join(target, "turnwire"), { recursive: true });
  for (const name of ["google", "LICENSE", "README.md"]) {
    cpSync(path.join(source, "vendor", name), path.join(target, "vendor", name), { recursive: true });
  }
}
