"""Everything that runs llama.cpp's own server: the server processes (``llama_servers``: start,
wait for health, kill, restart on the same port), the two servers the remote variants of the
integration and standard tests use (``remote_servers``), and the tests that only make sense live
(a fleet of servers). ``make test-live`` runs the remote variants live, then this folder."""
