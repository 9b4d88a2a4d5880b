"""Imported first by ``turnwire.cli``, before anything loads grpc.

gRPC's C core writes a failed TLS handshake to stderr at INFO ("Handshake failed
with error SSL_ERROR_SSL ..."), above the command's own one line that already
says what failed and which option fixes it. Its verbosity is read when grpc
loads, so it is set here: ERROR and worse only, unless GRPC_VERBOSITY is set.
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
