"""Install nerd (the library, its Newton environments in ``nerd.envs``, and its ``nerd-*`` commands).

``install_requires`` holds compatible ranges, so ``pip install -e .`` keeps what a user already has (a CUDA
build of torch above all); ``requirements.txt`` is the exact, tested lock that ``make`` installs first.
"""

from pathlib import Path

from setuptools import find_packages, setup

here = Path(__file__).parent

install_requires = [
    # The physics stack stays on the tested minor versions: datasets, trained models and every number in
    # docs/notebook/results.md depend on the solvers' exact behaviour, which changes between Newton/Warp minor releases.
    "newton==1.8.*",
    "warp-lang==1.19.*",
    # Any recent torch, so that an installed CUDA build satisfies it and is never replaced by a CPU wheel.
    "torch>=2.4",
    "numpy>=1.26",
    "h5py>=3.10",
    "pyyaml>=6.0",
    "tensorboard>=2.14",
    "tqdm>=4.66",
    "matplotlib>=3.8",
    # nerd.rl subclasses rl-games' runner and vec-env interfaces, which change between minor releases.
    "rl-games>=1.6.5,<1.7",
    "gymnasium>=0.29",
]

extras_require = {
    # --viewer gl (a window) and --video (off-screen through EGL) use Newton's OpenGL viewer (pyglet);
    # --viewer usd needs OpenUSD (pxr). Ranges are Newton 1.8's own for these packages.
    "viewer": ["pyglet>=2.1.6,<3", "pillow>=10", "usd-core>=25.5,<26.9"],
    "dev": ["pytest>=8", "pytest-xdist>=3"],
}

console_scripts = [
    "nerd-generate=nerd.scripts.generate:cli",
    "nerd-visualize=nerd.scripts.visualize:cli",
    "nerd-train=nerd.scripts.train:cli",
    "nerd-average=nerd.scripts.average:cli",
    "nerd-eval=nerd.scripts.eval_passive:cli",
    "nerd-rl=nerd.scripts.rl:cli",
    "nerd-batch-eval=nerd.scripts.batch_eval:cli",
    "nerd-transfer=nerd.scripts.transfer:cli",
    "nerd-data-range=nerd.scripts.data_range:cli",
]

setup(
    name="nerd",
    version="0.1.0",
    description="Neural Robot Dynamics (NeRD) on NVIDIA Warp's Newton engine",
    long_description=(here / "README.md").read_text() if (here / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.11",  # the tested lock (numpy 2.4, matplotlib 3.11) needs 3.11
    packages=find_packages(include=["nerd", "nerd.*"]),
    install_requires=install_requires,
    extras_require=extras_require,
    entry_points={"console_scripts": console_scripts},
)
