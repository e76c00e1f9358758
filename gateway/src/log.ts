import pino from 'pino';

export const logger = pino({
  name: 'tether-gateway',
  level: process.env.TETHER_LOG_LEVEL ?? 'info',
  // Tokens never reach a log line, even by accident through metadata dumps.
  redact: { paths: ['authorization', '*.authorization', 'token', '*.token', 'tokens'], censor: '[redacted]' },
});
