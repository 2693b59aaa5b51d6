#!/bin/sh
# Opens kvscope-viz's window (not a screenshot) under Xvfb on a screen of SCREEN
# pixels, the desktop's scaling set by Xft.dpi (192: twice; "" leaves it unset, 1x),
# prints the line the app prints once its window is open, and closes the window:
# the app runs until then. Any other output of the app is printed too.
#   open_window.sh KVSCOPE_VIZ SCREEN DPI [ARGS...]
viz=$1 screen=$2 dpi=$3
shift 3
# -noreset: Xvfb would drop xrdb's settings when xrdb, its first client, disconnects.
exec xvfb-run -a -s "-screen 0 ${screen}x24 -noreset" sh -c '
  viz=$1 dpi=$2
  shift 2
  [ -z "$dpi" ] || echo "Xft.dpi: $dpi" | xrdb -nocpp -merge
  out=$(mktemp)
  "$viz" --scenario blog-1k-random "$@" > "$out" 2>&1 &
  pid=$!
  i=0
  while [ $i -lt 300 ] && kill -0 $pid 2>/dev/null && ! grep -q "^kvscope-viz: window" "$out"; do
    sleep 0.1
    i=$((i + 1))
  done
  kill $pid 2>/dev/null
  wait $pid 2>/dev/null
  cat "$out"
  rm -f "$out"' sh "$viz" "$dpi" "$@"
