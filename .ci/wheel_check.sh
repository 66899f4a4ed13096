#!/usr/bin/env bash
# The package works without the source tree: build an sdist and a wheel, install the wheel over the
# editable install (same venv, same pinned dependencies), and run the CLI and the loaders' import from
# a folder outside the checkout.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
python -m build --outdir "$work/dist" "$repo" >"$work/build.log" 2>&1 || { tail -20 "$work/build.log"; exit 1; }
pip install -q --no-deps --force-reinstall "$work"/dist/*.whl
cp -r "$repo/examples/corpus" "$work/corpus"
cd "$work"
python -c "import corgi_io, sys; sys.exit(0 if '/site-packages/' in corgi_io.__file__ else 'corgi_io imported from ' + corgi_io.__file__)"
corgi --version
corgi pack corpus pack --kind image --workers 1 >/dev/null
corgi stats pack | tail -1
corgi verify pack >/dev/null
python -c "import corgi_io.loaders as l; print('corgi_io.loaders', len(l.CorgiPileDataset('pack')), 'samples')"
echo "wheel check: $(ls dist)"
