#!/bin/sh
# Stands in for "reload the process that reads the files": it says what
# changed. pawl-agent runs it once after its initial sync, then once after
# each batch of files it writes or removes (PAWL_FILES, one a line).
if [ -n "$PAWL_CONFIG" ]; then
	echo "reload: $PAWL_CONFIG is now generation $PAWL_GENERATION ($PAWL_FILE)"
else
	echo "reload: $(printf '%s\n' "$PAWL_FILES" | grep -c .) files changed"
fi
