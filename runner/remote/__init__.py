"""``spool worker --server URL``: a worker for a spool on another host (``worker``), its HTTPS
client (``client``) and the lease it is handed, checked as input from the network (``lease``)."""
