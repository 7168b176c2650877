#!/usr/bin/env bash
# CI: what the browser tests (tests/test_browser.py) need, on a fresh Debian machine: Debian's Chromium, which
# Playwright drives through executable_path (installed only when /usr/bin/chromium is missing), and the `lab`
# extra (JupyterLab) in the virtual environment whose Python is $1.
#
#   bash scripts/ci_browser.sh .venv/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${1:?usage: scripts/ci_browser.sh PATH/TO/VENV/bin/python}"

if [ ! -x /usr/bin/chromium ]; then
  echo "ci: installing chromium and chromium-driver from Debian"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null
fi
/usr/bin/chromium --version 2>/dev/null || { echo "ci: /usr/bin/chromium does not run"; exit 1; }

"$PYTHON" -m pip install -q -e ".[lab]"
"$PYTHON" -c "import jupyterlab, playwright.sync_api" || { echo "ci: jupyterlab or playwright missing"; exit 1; }
