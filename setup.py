"""Install nerd, the library (its Newton environments are the subpackage nerd.envs)."""

from pathlib import Path

from setuptools import find_packages, setup

here = Path(__file__).parent
requirements = [
    line.strip()
    for line in (here / "requirements.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]

setup(
    name="nerd",
    version="0.1.0",
    description="Neural Robot Dynamics (NeRD) on NVIDIA Warp's Newton engine",
    long_description=(here / "README.md").read_text() if (here / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["nerd", "nerd.*"]),
    install_requires=requirements,
)
