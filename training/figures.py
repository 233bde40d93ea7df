"""Figures drawn the same way by the runs' reports, symbert-glue's sweep and the benchmarks: a bare Figure on the
Agg canvas (no pyplot global state, no display needed), written as a PNG atomically."""

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..files import write_atomically

FIGURE_SIZE = (7.0, 4.5)  # inches
FIGURE_DPI = 120


def new_figure(ylabel: str, title: str | None) -> tuple[Figure, Axes]:
    # A bare Figure on the Agg canvas: no pyplot global state, no display needed.
    fig = Figure(figsize=FIGURE_SIZE, dpi=FIGURE_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    return fig, ax


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Writes the PNG atomically (write_atomically)."""
    path = Path(path)
    write_atomically(path, lambda file: fig.savefig(file, format="png"), binary=True)
    return path
