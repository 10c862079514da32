"""Only marks the wheel as platform-specific when it carries libzeroshard.so
(the rest of the configuration is in pyproject.toml)."""
import os

from setuptools import setup
from setuptools.dist import Distribution

_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zeroshard",
                    "libzeroshard.so")


class _Distribution(Distribution):
    def has_ext_modules(self):
        return os.path.exists(_LIB)


setup(distclass=_Distribution)
