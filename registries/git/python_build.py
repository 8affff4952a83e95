"""What registry-git asks the host's Python before and after building a wheel (stdlib and pip only).

    python3 -I python_build.py check <project dir>  -> what the build needs, and what of it is missing
    python3 -I python_build.py requires <wheel>     -> the wheel's Requires-Dist that apply here

Both print one JSON object. Neither imports anything of the project: only its pyproject.toml is read.
"""

import importlib.metadata
import json
import os
import sys
import zipfile
from email.parser import Parser

try:
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version
except ImportError:  # no pip: `check` says so, `requires` is never reached
    Requirement = Version = None

try:
    import tomllib
except ImportError:  # Python < 3.11: pip vendors the same parser
    try:
        from pip._vendor import tomli as tomllib
    except ImportError:
        tomllib = None

# What pip uses when pyproject.toml names no backend (PEP 517).
DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"
DEFAULT_REQUIRES = ["setuptools>=40.8.0", "wheel"]


def installed_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def unmet(requirement_text):
    """The requirement as an operator reads it, when this Python does not satisfy it."""
    requirement = Requirement(requirement_text)
    if requirement.marker is not None and not requirement.marker.evaluate():
        return None
    version = installed_version(requirement.name)
    if version is None:
        return requirement_text
    if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
        return f"{requirement_text} (found {requirement.name} {version})"
    return None


def check(project):
    answer = {
        "python": sys.version.split()[0],
        "pip": installed_version("pip"),
        "backend": DEFAULT_BACKEND,
        "requires": DEFAULT_REQUIRES,
        "inTreeBackend": False,
        "setupPy": os.path.exists(os.path.join(project, "setup.py")),
        "missing": [],
    }
    if answer["pip"] is None or Requirement is None:
        answer["missing"].append("pip")
        return answer
    if tomllib is None:
        answer["missing"].append("a TOML parser (Python 3.11, or a pip that vendors tomli)")
        return answer
    with open(os.path.join(project, "pyproject.toml"), "rb") as file:
        build_system = tomllib.load(file).get("build-system", {})
    answer["backend"] = build_system.get("build-backend", DEFAULT_BACKEND)
    answer["requires"] = build_system.get("requires", DEFAULT_REQUIRES)
    answer["inTreeBackend"] = bool(build_system.get("backend-path"))
    answer["missing"] = [m for m in map(unmet, answer["requires"]) if m is not None]
    # setuptools builds wheels with the `wheel` package until 70.1 brought bdist_wheel in. Asked of
    # its metadata: importing setuptools here would apply its distutils override to this process.
    setuptools = installed_version("setuptools")
    if answer["backend"].startswith("setuptools.") and setuptools and not answer["missing"]:
        if Version(setuptools) < Version("70.1") and installed_version("wheel") is None:
            answer["missing"].append(f"wheel (setuptools {setuptools} builds wheels only with it)")
    return answer


def requires(wheel):
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(name).decode("utf-8"))
    applying = []
    for text in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(text)
        # Only what an install without extras pulls in.
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            applying.append(text)
    return {"name": metadata.get("Name"), "version": metadata.get("Version"), "requires": applying}


if __name__ == "__main__":
    command, target = sys.argv[1], sys.argv[2]
    print(json.dumps(check(target) if command == "check" else requires(target)))
