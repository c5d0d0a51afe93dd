#!/bin/sh
# Stands in for "reload the process that reads the files": it says what
# changed. pawl-agent runs it after each file it writes or removes.
if [ -n "$PAWL_CONFIG" ]; then
	echo "reload: $PAWL_CONFIG is now generation $PAWL_GENERATION ($PAWL_FILE)"
else
	echo "reload: $PAWL_KEY changed ($PAWL_FILE)"
fi
