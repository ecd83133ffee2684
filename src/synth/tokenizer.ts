/**
 * Small but valid Hugging Face tokenizer files for synthetic models: a byte-level BPE with the 256 byte
 * tokens and no merges, plus each architecture's real special tokens placed right after the bytes.
 * Pure: returns file names and text, always the same for the same inputs.
 */

import type { SynthArch } from './architectures.js';

export const BYTE_TOKEN_COUNT = 256;

interface SpecialTokens {
  /** All special tokens in id order, starting at BYTE_TOKEN_COUNT. */
  tokens: string[];
  bos: string;
  eos: string;
  /** Whether the tokenizer prepends bos (Llama and DeepSeek do, Qwen does not). */
  addBos: boolean;
}

const SPECIAL_TOKENS: Record<SynthArch, SpecialTokens> = {
  llama: {
    tokens: [
      '<|begin_of_text|>',
      '<|end_of_text|>',
      '<|start_header_id|>',
      '<|end_header_id|>',
      '<|eot_id|>',
    ],
    bos: '<|begin_of_text|>',
    eos: '<|end_of_text|>',
    addBos: true,
  },
  'qwen2-moe': {
    tokens: ['<|endoftext|>', '<|im_start|>', '<|im_end|>'],
    bos: '<|endoftext|>',
    eos: '<|endoftext|>',
    addBos: false,
  },
  'deepseek-v3': {
    tokens: ['<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜▁pad▁｜>'],
    bos: '<｜begin▁of▁sentence｜>',
    eos: '<｜end▁of▁sentence｜>',
    addBos: true,
  },
};

/** The smallest vocab_size a synthetic model may have: the bytes plus room for the special tokens. */
export const VOCAB_MIN = 320;

export function specialTokenIds(arch: SynthArch): { bos: number; eos: number } {
  const special = SPECIAL_TOKENS[arch];
  return {
    bos: BYTE_TOKEN_COUNT + special.tokens.indexOf(special.bos),
    eos: BYTE_TOKEN_COUNT + special.tokens.indexOf(special.eos),
  };
}

export interface TextFile {
  name: string;
  text: string;
}

export function tokenizerFiles(arch: SynthArch, modelMaxLength: number): TextFile[] {
  const special = SPECIAL_TOKENS[arch];
  const ids = specialTokenIds(arch);
  const json = (value: unknown): string => JSON.stringify(value, null, 2) + '\n';
  const specialsMap: Record<string, unknown> = { bos_token: special.bos, eos_token: special.eos };
  if (special.tokens.length > 2) specialsMap['additional_special_tokens'] = special.tokens.slice(2);
  return [
    { name: 'tokenizer.json', text: json(tokenizerJson(special)) },
    { name: 'tokenizer_config.json', text: json(tokenizerConfig(special, modelMaxLength)) },
    { name: 'special_tokens_map.json', text: json(specialsMap) },
    {
      name: 'generation_config.json',
      text: json({
        bos_token_id: ids.bos,
        eos_token_id: ids.eos,
        do_sample: true,
        temperature: 0.6,
        top_p: 0.9,
        transformers_version: TRANSFORMERS_VERSION,
      }),
    },
  ];
}

/** The transformers version synthetic configs claim; any version that knows all three archs works. */
export const TRANSFORMERS_VERSION = '4.46.0';

function addedTokenFields(content: string): Record<string, unknown> {
  return { content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}

function tokenizerJson(special: SpecialTokens): Record<string, unknown> {
  const vocab: Record<string, number> = {};
  byteLevelAlphabet().forEach((char, byte) => {
    vocab[char] = byte;
  });
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: special.tokens.map((token, i) => ({
      id: BYTE_TOKEN_COUNT + i,
      ...addedTokenFields(token),
    })),
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: { ...byteLevel, trim_offsets: false },
    decoder: byteLevel,
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: [],
    },
  };
}

function tokenizerConfig(special: SpecialTokens, modelMaxLength: number): Record<string, unknown> {
  const decoder: Record<string, unknown> = {};
  special.tokens.forEach((token, i) => {
    decoder[String(BYTE_TOKEN_COUNT + i)] = addedTokenFields(token);
  });
  return {
    add_bos_token: special.addBos,
    add_eos_token: false,
    added_tokens_decoder: decoder,
    bos_token: special.addBos ? special.bos : null,
    clean_up_tokenization_spaces: false,
    eos_token: special.eos,
    model_max_length: modelMaxLength,
    tokenizer_class: 'PreTrainedTokenizerFast',
  };
}

/**
 * GPT-2's byte-to-unicode table: printable bytes stand for themselves, the others are shifted past 255
 * so that every byte is one visible character. Index = byte value.
 */
function byteLevelAlphabet(): string[] {
  const printable = (byte: number): boolean =>
    (byte >= 0x21 && byte <= 0x7e) || (byte >= 0xa1 && byte <= 0xac) || (byte >= 0xae && byte <= 0xff);
  const alphabet: string[] = [];
  let shifted = 0;
  for (let byte = 0; byte < BYTE_TOKEN_COUNT; byte++) {
    alphabet.push(String.fromCharCode(printable(byte) ? byte : BYTE_TOKEN_COUNT + shifted++));
  }
  return alphabet;
}
