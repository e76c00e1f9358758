import pino from 'pino';

/** Logs go to stderr: stdout belongs to the protocol. */
export const logger = pino(
  { name: 'tether-runner', level: process.env.TETHER_LOG_LEVEL ?? 'info' },
  pino.destination(2),
);
