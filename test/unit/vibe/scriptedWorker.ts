/**
 * The scripted worker: every brief line "add: X" becomes a line of notes.txt; FAIL fails,
 * SLOW starts a sleeping child (its pid in sleeper.pid) and waits for it; CHECK says whether
 * that child is still alive (a zombie counts as gone).
 */
export const SCRIPTED_WORKER = [
  'brief=$(cat)',
  'case "$brief" in *FAIL*) echo "cannot do it: $TETHER_WORKER_ID" >&2; exit 3;; esac',
  'case "$brief" in *CHECK*) p=$(cat sleeper.pid); if kill -0 "$p" 2>/dev/null && ! grep -q "^State:.*Z" /proc/$p/status; then echo alive; else echo gone; fi; exit 0;; esac',
  'case "$brief" in *SLOW*) sleep 60 & echo $! > sleeper.pid; wait;; esac',
  `printf '%s\\n' "$brief" | sed -n 's/^add: //p' > notes.txt`,
  'echo "$TETHER_WORKER_ID round $TETHER_WORKER_ROUND wrote $(wc -l < notes.txt) lines"',
].join('\n');
