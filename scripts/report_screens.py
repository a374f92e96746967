"""Look at a report as a reader does: an 80-column terminal capture of `rbctl report` and headless
Chromium screenshots of report.html and of the terminal capture.

    python -m scripts.report_screens DIR... -o OUT

Writes OUT/report/ (the report itself), OUT/terminal.txt (what `rbctl report` printed at 80 columns),
and, where Chromium is installed (Debian's `chromium`), OUT/report.png and OUT/terminal.png. Exit 2
with one line when Chromium is missing and PNGs were asked for (`--no-png` skips them).
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rbctl.store.rundir import REPORT_DIR, REPORT_HTML

WIDTH = 80
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")


def terminal_capture(dirs: list[Path], out: Path) -> str:
    """What `rbctl report DIRS -o OUT/report` prints in an 80-column terminal."""
    env = {**os.environ, "COLUMNS": str(WIDTH), "TERM": "dumb"}
    done = subprocess.run([sys.executable, "-m", "rbctl", "report", *map(str, dirs), "-o", str(out / REPORT_DIR)],
                          capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"error: rbctl report exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def screenshot(chromium: str, page: Path, png: Path, width: int, height: int) -> None:
    subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={png.parent / '.chromium'}",
                    f"--window-size={width},{height}", f"--screenshot={png}", page.resolve().as_uri()],
                   capture_output=True, check=True, timeout=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.report_screens", description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="run or sweep directories (what rbctl report reads)")
    ap.add_argument("-o", "--out", type=Path, required=True, help="output folder")
    ap.add_argument("--no-png", action="store_true", help="only the terminal capture and the report")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    text = terminal_capture(a.dirs, a.out)
    (a.out / "terminal.txt").write_text(text)
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    print(f"terminal: {len(text.splitlines())} lines, widest {max(map(len, text.splitlines()), default=0)} columns"
          + (f" ({len(wide)} over {WIDTH})" if wide else ""))
    if a.no_png:
        return 0
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("error: no chromium on PATH (apt-get install chromium), or pass --no-png", file=sys.stderr)
        return 2
    page = a.out / "terminal.html"
    page.write_text("<html><body style='margin:8px;background:#111;color:#eee'><pre style='font:14px monospace'>"
                    f"{html.escape(text)}</pre></body></html>")
    screenshot(chromium, page, a.out / "terminal.png", 8 * WIDTH + 40, 1400)
    screenshot(chromium, a.out / REPORT_DIR / REPORT_HTML, a.out / "report.png", 1280, 6000)
    print(f"wrote {a.out / 'terminal.png'} and {a.out / 'report.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
