#!/bin/sh
# The smallest framed executor (docs/EXECUTORS.md): two chunks, then the result.
#   --executor hello=subprocess+framed:sh examples/framed/hello.sh
read -r request  # the request line (JSON); this one does not need it
printf '%s\n' '{"type":"chunk","text":"Hello, "}'
printf '%s\n' '{"type":"chunk","text":"world"}'
printf '%s\n' '{"type":"result","text":"Hello, world"}'
