"""YAML for spool's files: the safe loader (YAML 1.2 core schema, libyaml's events where they are
provably the same), the emitter, and the schema both share (``safe``, ``dump``, ``schema``); the
plain documents spool writes need no PyYAML (``plain``), the rest import it (``parse``, ``emit``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spool.base.surface import lazy_surface

if TYPE_CHECKING:  # the surface runner/ and cli/ import (spool.base.surface)
    from spool.yaml.safe import load_yaml as load_yaml

__getattr__ = lazy_surface(__name__, __file__)
