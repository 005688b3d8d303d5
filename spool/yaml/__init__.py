"""YAML for spool's files: the safe loader (YAML 1.2 core schema, libyaml's events where they are
provably the same), the emitter, and the schema both share (``safe``, ``dump``, ``schema``)."""
