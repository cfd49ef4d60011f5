// Writes the expected ids of tests/data/fixtures/tokenizers/corpus.jsonl for
// each family's real tokenizer.json, computed by Hugging Face's reference
// `tokenizers` library (its official Node binding). Run through
// scripts/gen_tokenizer_fixtures.sh, never from CI.
//
// usage: node gen_tokenizer_fixtures.js FIXTURE_DIR FAMILY_MODELS_DIR...
//   each FAMILY_MODELS_DIR holds tokenizer.json (+ tokenizer_config.json);
//   the family name is the npm package's suffix (tokenizer-<family>).
'use strict';
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');

// transformers' Llama/Gemma fast tokenizers rebuild the post-processor from
// tokenizer_config.json's add_bos_token / add_eos_token (update_post_processor);
// mtrain honours those keys, so the reference must apply them too.
function configPostProcessor(tokenizerJson, config) {
  if (!/^(Llama|Gemma|CodeLlama)Tokenizer(Fast)?$/.test(config.tokenizer_class || '')) return null;
  if (!('add_bos_token' in config) && !('add_eos_token' in config)) return null;
  const name = (t) => (t === null || t === undefined ? null : typeof t === 'string' ? t : t.content);
  const idOf = (content) => {
    const added = tokenizerJson.added_tokens.find((t) => t.content === content);
    return added ? added.id : tokenizerJson.model.vocab[content];
  };
  const bos = name(config.bos_token), eos = name(config.eos_token);
  const parts = [], special = [];
  if (config.add_bos_token && bos) { parts.push(bos + ':0'); special.push([bos, idOf(bos)]); }
  parts.push('$A:0');
  if (config.add_eos_token && eos) { parts.push(eos + ':0'); special.push([eos, idOf(eos)]); }
  return tk.templateProcessing(parts.join(' '), null, special);
}

// Component configurations (as tokenizer.json spells them) that the real
// files above do not exercise; components.json gets the reference's output
// for a third of the corpus strings.
const NORMALIZERS = [
  { type: 'NFC' }, { type: 'NFD' }, { type: 'NFKC' }, { type: 'NFKD' }, { type: 'Lowercase' },
  { type: 'Strip', strip_left: true, strip_right: true }, { type: 'Strip', strip_left: false, strip_right: true },
  { type: 'Prepend', prepend: '\u2581' }, { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' },
  { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Lowercase' }] },
];
const BEHAVIORS = ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous'];
const PRE_TOKENIZERS = [
  { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true },
  { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false },
  { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'never', split: true },
  { type: 'Digits', individual_digits: true }, { type: 'Digits', individual_digits: false },
  { type: 'Punctuation', behavior: 'Isolated' }, { type: 'Punctuation', behavior: 'Contiguous' },
  { type: 'Whitespace' }, { type: 'WhitespaceSplit' },
  ...BEHAVIORS.map((b) => ({ type: 'Split', pattern: { String: ' ' }, behavior: b, invert: false })),
  { type: 'Split', pattern: { String: ' ' }, behavior: 'Isolated', invert: true },
];

const DECODERS = [
  { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true },
  { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: true },
  { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'never', split: true },
  { type: 'Strip', content: ' ', start: 1, stop: 1 },
  { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
  { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Fuse' }] },
];

function decoderOf(c) {
  switch (c.type) {
    case 'Metaspace': return tk.metaspaceDecoder(c.replacement, c.prepend_scheme, c.split);
    case 'Strip': return tk.stripDecoder(c.content, c.start, c.stop);
    case 'Replace': return tk.replaceDecoder(c.pattern.String, c.content);
    case 'ByteFallback': return tk.byteFallbackDecoder();
    case 'Fuse': return tk.fuseDecoder();
    case 'Sequence': return tk.sequenceDecoder(c.decoders.map(decoderOf));
  }
  throw new Error('no decoder ' + c.type);
}

function normalizerOf(c) {
  switch (c.type) {
    case 'NFC': return tk.nfcNormalizer();
    case 'NFD': return tk.nfdNormalizer();
    case 'NFKC': return tk.nfkcNormalizer();
    case 'NFKD': return tk.nfkdNormalizer();
    case 'Lowercase': return tk.lowercase();
    case 'Strip': return tk.stripNormalizer(c.strip_left, c.strip_right);
    case 'Prepend': return tk.prependNormalizer(c.prepend);
    case 'Replace': return tk.replace(c.pattern.String, c.content);
    case 'Sequence': return tk.sequenceNormalizer(c.normalizers.map(normalizerOf));
  }
  throw new Error('no normalizer ' + c.type);
}

function preTokenizerOf(c) {
  switch (c.type) {
    case 'Metaspace': return tk.metaspacePreTokenizer(c.replacement, c.prepend_scheme, c.split);
    case 'Digits': return tk.digitsPreTokenizer(c.individual_digits);
    case 'Punctuation': return tk.punctuationPreTokenizer(c.behavior[0].toLowerCase() + c.behavior.slice(1));
    case 'Whitespace': return tk.whitespacePreTokenizer();
    case 'WhitespaceSplit': return tk.whitespaceSplitPreTokenizer();
    case 'Split': return tk.splitPreTokenizer(c.pattern.String, c.behavior[0].toLowerCase() + c.behavior.slice(1), c.invert);
  }
  throw new Error('no pre-tokenizer ' + c.type);
}

function componentCases(corpus) {
  const texts = corpus.filter((_, i) => i % 3 === 0);
  const cases = [];
  for (const config of NORMALIZERS) {
    const n = normalizerOf(config);
    cases.push({ normalizer: config, texts, outputs: texts.map((t) => n.normalizeString(t)) });
  }
  for (const config of PRE_TOKENIZERS) {
    const p = preTokenizerOf(config);
    cases.push({ pre_tokenizer: config, texts, outputs: texts.map((t) => p.preTokenizeString(t).map((x) => x[0])) });
  }
  // Decoder inputs: Metaspace pieces of the texts with spaces doubled (so
  // Strip has work), and SentencePiece byte pieces mixed with text.
  const metaspace = tk.metaspacePreTokenizer('\u2581', 'always', true);
  const tokenLists = texts.map((t) => metaspace.preTokenizeString(t).map((x) => ' ' + x[0] + ' '));
  tokenLists.push(['<0xE2>', '<0x98>', '<0x83>', '\u2581a', '<0xFF>', 'b', '<0x41>']);
  for (const config of DECODERS) {
    const d = decoderOf(config);
    cases.push({ decoder: config, tokens: tokenLists, outputs: tokenLists.map((t) => d.decode(t)) });
  }
  return cases;
}

async function main() {
  const [fixtureDir, ...modelDirs] = process.argv.slice(2);
  const corpus = fs.readFileSync(path.join(fixtureDir, 'corpus.jsonl'), 'utf8')
                   .split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  fs.writeFileSync(path.join(fixtureDir, 'components.json'), JSON.stringify(componentCases(corpus)) + '\n');
  for (const dir of modelDirs) {
    const family = path.basename(path.dirname(dir)).replace(/^tokenizer-/, '');
    const file = path.join(dir, 'tokenizer.json');
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    const configFile = path.join(dir, 'tokenizer_config.json');
    const config = fs.existsSync(configFile) ? JSON.parse(fs.readFileSync(configFile, 'utf8')) : {};
    const plain = tk.Tokenizer.fromFile(file);
    const withSpecial = tk.Tokenizer.fromFile(file);
    const processor = configPostProcessor(json, config);
    if (processor) withSpecial.setPostProcessor(processor);
    const lines = [];
    for (const text of corpus) {
      const ids = (await plain.encode(text, null, { addSpecialTokens: false })).getIds();
      const idsSpecial = (await withSpecial.encode(text, null, { addSpecialTokens: true })).getIds();
      const decoded = await plain.decode(ids, false);
      const decodedSkip = await plain.decode(idsSpecial, true);
      lines.push(JSON.stringify({ ids, ids_special: idsSpecial, decoded, decoded_skip_special: decodedSkip }));
    }
    const out = path.join(fixtureDir, family);
    fs.mkdirSync(out, { recursive: true });
    fs.writeFileSync(path.join(out, 'expected.jsonl'), lines.join('\n') + '\n');
    console.log(`${family}: ${lines.length} strings`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
