"""Print pip constraints pinning every dependency of pyproject.toml to its declared floor
(`numpy>=2.0,<3` -> `numpy==2.0`), for .ci/run's check that the floors are true."""

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
for requirement in project["dependencies"]:
    match = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*[^;]*?>=\s*([^,;\s]+)", requirement)
    if not match:
        sys.exit(f"{requirement!r} declares no floor (>=): every dependency needs one")
    print(f"{match.group(1)}=={match.group(2)}")
