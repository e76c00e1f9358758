import { PassThrough } from 'node:stream';
import { create } from '@bufbuild/protobuf';
import { status } from '@grpc/grpc-js';
import * as tarStream from 'tar-stream';
import {
  PutFilesResponseSchema,
  type PutFilesHeader,
  type PutFilesRequest,
  type PutFilesResponse,
} from '@tether/contract';
import { GatewayError, invalid } from '../errors';
import type { Sandbox } from '../sandbox/provider';
import type { InputStream } from './streams';

/** Where a PutFiles archive goes, decided from its header. */
export interface PutFilesTarget {
  sandbox: Pick<Sandbox, 'putArchive'>;
  relDir: string;
}

/** Counts the regular files in a tar stream as it passes, without holding it. */
function fileCounter(): { input: PassThrough; files(): number } {
  const input = new PassThrough();
  const extract = tarStream.extract();
  let files = 0;
  extract.on('entry', (h, s, next) => {
    if (h.type === 'file') files++;
    s.on('end', next);
    s.resume();
  });
  // A malformed archive is the sandbox's to refuse; the count only reports.
  extract.on('error', () => undefined);
  input.pipe(extract);
  return { input, files: () => files };
}

/**
 * Receives one PutFiles stream: the header first (opened by `open`, which checks the run and
 * the path), then chunks of one tar stream piped into the sandbox with backpressure, capped
 * at `maxBytes`. Resolves with the counts once the sandbox has unpacked everything.
 */
export function receivePutFiles(
  call: InputStream<PutFilesRequest>,
  open: (header: PutFilesHeader) => PutFilesTarget | Promise<PutFilesTarget>,
  maxBytes: number,
): Promise<PutFilesResponse> {
  return new Promise((resolve, reject) => {
    let tar: PassThrough | undefined;
    let counter: ReturnType<typeof fileCounter> | undefined;
    let done: Promise<void> | undefined;
    let bytes = 0;
    let failed = false;
    const fail = (err: unknown) => {
      if (failed) return;
      failed = true;
      tar?.destroy();
      reject(err);
    };
    call.on('data', (msg: PutFilesRequest) => {
      if (failed) return;
      try {
        if (msg.msg.case === 'header') {
          if (tar) throw invalid('PutFiles: the header may only be sent once, first');
          const header = msg.msg.value;
          // Two independent streams: the sandbox may start reading later than the counter
          // (after a paused run's resume, say); chunks wait in `tar` with backpressure.
          const archive = (tar = new PassThrough());
          counter = fileCounter();
          done = Promise.resolve()
            .then(() => open(header))
            .then((target) =>
              target.sandbox.putArchive(target.relDir, archive).catch((err: Error) => {
                throw invalid(`PutFiles: the tar stream was refused: ${err.message}`);
              }),
            );
          done.catch(fail);
        } else if (msg.msg.case === 'chunk') {
          if (!tar || !counter) throw invalid('PutFiles: the first message must be the header');
          bytes += msg.msg.value.length;
          if (bytes > maxBytes) {
            throw new GatewayError(
              status.RESOURCE_EXHAUSTED,
              `PutFiles: the archive is larger than the ${maxBytes}-byte limit; send it in parts`,
            );
          }
          counter.input.write(msg.msg.value);
          if (!tar.write(msg.msg.value)) {
            call.pause();
            tar.once('drain', () => call.resume());
          }
        }
      } catch (err) {
        fail(err);
      }
    });
    call.on('end', () => {
      if (failed) return;
      if (!tar || !counter || !done) return fail(invalid('PutFiles: no header was sent'));
      const files = counter;
      tar.end();
      files.input.end();
      done.then(() => {
        if (!failed)
          resolve(create(PutFilesResponseSchema, { filesWritten: files.files(), bytesWritten: BigInt(bytes) }));
      }, fail);
    });
    call.on('error', fail);
  });
}
