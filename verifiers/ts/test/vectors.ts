/** Loads docs/vectors/core.json from the repository (Node.js side of the tests). */
import { readFileSync } from "node:fs";
import type { VFile } from "./cases.js";

export * from "./cases.js";

export const vectorsUrl = new URL("../../../../docs/vectors/core.json", import.meta.url);

export function loadVectors(): VFile {
  return JSON.parse(readFileSync(vectorsUrl, "utf8")) as VFile;
}
