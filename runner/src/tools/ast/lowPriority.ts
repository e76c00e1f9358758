import { setPriority } from 'node:os';

// Imported first by the index thread, so even loading its modules runs at nice 19. On Linux
// the priority of pid 0 is the calling thread's: only this thread is lowered.
try {
  setPriority(0, 19);
} catch {
  // not permitted here: index at normal priority
}
