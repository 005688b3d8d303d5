"""The disk: every filesystem call through one seam (``fsio``; Linux specifics in ``linux``), the
spool's folders and file names (``layout``), what a heartbeat file holds (``heartbeat``), locks
(``locks``), ids (``ids``) and making or refusing a spool's root (``rootdir``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spool.base.surface import lazy_surface

if TYPE_CHECKING:  # the surface runner/ and cli/ import (spool.base.surface)
    from spool.disk.fsio import fs as fs
    from spool.disk.heartbeat import (
        HEARTBEAT_MAX_BYTES as HEARTBEAT_MAX_BYTES,
        heartbeat_lines as heartbeat_lines,
        parse_heartbeat as parse_heartbeat,
    )
    from spool.disk.ids import is_generated_id as is_generated_id, is_valid_id as is_valid_id
    from spool.disk.layout import (
        CERT_NAME as CERT_NAME,
        KEY_NAME as KEY_NAME,
        MARKER as MARKER,
        SCHEDULES as SCHEDULES,
        SESSIONS_NAME as SESSIONS_NAME,
        State as State,
        TLS as TLS,
        WAKE_NAME as WAKE_NAME,
        coordinator_lock_name as coordinator_lock_name,
        heartbeat_name as heartbeat_name,
        is_ignored_name as is_ignored_name,
        job_id_of as job_id_of,
        log_name as log_name,
        parse_heartbeat_name as parse_heartbeat_name,
        result_name as result_name,
        tls_lock_name as tls_lock_name,
        tmp_name as tmp_name,
        worker_lock_name as worker_lock_name,
    )
    from spool.disk.locks import Lock as Lock, acquire as acquire, acquire_within as acquire_within, is_held as is_held
    from spool.disk.rootdir import init_spool as init_spool

__getattr__ = lazy_surface(__name__, __file__)
