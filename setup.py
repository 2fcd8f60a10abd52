"""Packaging beyond pyproject.toml: the web app (app/) ships inside the distribution as the
package `parasim_app`, so `pip install .` (not only -e) can run `parasim app`."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["simulator", "simulator.*"]) + ["parasim_app", "parasim_app.views"],
      package_dir={"parasim_app": "app"})
