"""The plotter choice that bench/plot_gpu.py and bench/plot_gnn.py share.

GPUMEM_PLOT_WITH=auto (default), gnuplot, matplotlib or none. auto draws
with gnuplot where it is on PATH, else with matplotlib; a plot that is not
drawn is said, with why and where the data is kept, and ends the program
with exit 3 (nothing drawn is not a failure of the run that made the data).
"""
import os
import shutil
import subprocess
import sys

CHOICES = ("auto", "gnuplot", "matplotlib", "none")


def plotter(prog):
    """GPUMEM_PLOT_WITH, checked; a bad value ends the program naming it."""
    p = os.environ.get("GPUMEM_PLOT_WITH", "auto")
    if p not in CHOICES:
        sys.exit(f"{prog}: GPUMEM_PLOT_WITH={p}: one of {', '.join(CHOICES)}")
    return p


def draw(prog, p, gnuplot_script, with_matplotlib, kept):
    """Draw with gnuplot (running gnuplot_script) or with_matplotlib() (False
    where matplotlib is missing), as p says; where neither draws, say why
    and what is `kept`, and exit 3."""
    if p in ("auto", "gnuplot") and shutil.which("gnuplot"):
        subprocess.run(["gnuplot", gnuplot_script], check=True)
        return
    if p in ("auto", "matplotlib") and with_matplotlib():
        return
    why = {"none": "GPUMEM_PLOT_WITH=none", "gnuplot": "gnuplot not found",
           "matplotlib": "matplotlib not found"}.get(p, "neither gnuplot nor matplotlib found")
    print(f"{prog}: not drawn ({why}){kept}", file=sys.stderr)
    sys.exit(3)
