"""The disk: every filesystem call through one seam (``fsio``; Linux specifics in ``linux``), the
spool's folders and file names (``layout``), locks (``locks``), ids (``ids``) and making or refusing
a spool's root (``rootdir``)."""
