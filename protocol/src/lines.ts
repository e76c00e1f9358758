import type { Readable } from 'node:stream';

/**
 * Reads one newline-terminated line from a stream and leaves every byte after it in the
 * stream, for the JSON-RPC reader that takes over. Rejects on end, overlong input or timeout.
 * The bytes read are zeroed once copied out, so a secret line leaves one copy only: the
 * caller's, which it can zero in turn. The stream is left paused: whoever reads next resumes
 * it once its own listener is in place, so no byte is dropped in between.
 */
export function readLine(stream: Readable, maxBytes: number, timeoutMs?: number): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const timer =
      timeoutMs === undefined
        ? undefined
        : setTimeout(() => done(new Error(`no line within ${timeoutMs} ms`)), timeoutMs);
    const done = (err: Error | undefined, line?: Buffer, rest?: Buffer) => {
      clearTimeout(timer);
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('close', onEnd);
      stream.off('error', onError);
      stream.pause();
      if (rest && rest.length > 0) stream.unshift(rest);
      for (const c of chunks) c.fill(0);
      if (err) reject(err);
      else resolve(line!);
    };
    const onData = (chunk: Buffer) => {
      const nl = chunk.indexOf(0x0a);
      if (nl < 0) {
        chunks.push(chunk);
        size += chunk.length;
        if (size > maxBytes) done(new Error(`line longer than ${maxBytes} bytes`));
        return;
      }
      if (size + nl > maxBytes) return done(new Error(`line longer than ${maxBytes} bytes`));
      const line = Buffer.alloc(size + nl);
      let at = 0;
      for (const c of chunks) at += c.copy(line, at);
      chunk.copy(line, at, 0, nl);
      const rest = Buffer.from(chunk.subarray(nl + 1));
      chunk.fill(0, 0, nl);
      done(undefined, line, rest);
    };
    const onEnd = () => done(new Error('the stream ended before a full line'));
    const onError = (err: Error) => done(err);
    stream.on('data', onData);
    stream.once('end', onEnd);
    stream.once('close', onEnd);
    stream.once('error', onError);
    stream.resume();
  });
}
