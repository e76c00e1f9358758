import { gunzipSync } from 'node:zlib';
import { status } from '@grpc/grpc-js';
import { FsWriteCommand } from '../../../protocol/src/fs';
import { GatewayError, invalid } from '../errors';
import { header, readBody, sendJson, type Req, type Res } from './http';
import { fromWorkspace } from './paths';
import type { SandboxRun } from './sandboxRun';

/**
 * The daemon's file transfer (`GET /files` downloads one file, `POST /files` uploads one as a
 * raw body or several as multipart/form-data), onto the runner's fs family: whole files,
 * bounded by `maxBytes`, each written atomically.
 */
export class E2bFiles {
  constructor(private readonly maxBytes: number) {}

  async handle(sandbox: SandboxRun, req: Req, res: Res): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://e2b');
    const path = url.searchParams.get('path') ?? '';
    if (req.method === 'GET') {
      if (!path) throw invalid('missing the path query parameter');
      const data = await sandbox.read(path, this.maxBytes);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': data.length });
      res.end(data);
      return;
    }
    if (req.method !== 'POST') throw new GatewayError(status.UNIMPLEMENTED, `${req.method} /files is not served`);
    let body = await readBody(req, this.maxBytes);
    if (header(req, 'content-encoding') === 'gzip') body = this.gunzip(body);
    const type = header(req, 'content-type') ?? '';
    const files: { path: string; data: Buffer }[] = [];
    if (type.startsWith('multipart/form-data')) {
      const form = await new Response(body, { headers: { 'content-type': type } }).formData().catch((err: Error) => {
        throw invalid(`the multipart body does not parse: ${err.message}`);
      });
      for (const value of form.values()) {
        if (typeof value === 'string') continue;
        // One file takes the path parameter; several name their paths as their file names.
        const target = path && form.getAll('file').length <= 1 ? path : value.name;
        files.push({ path: target, data: Buffer.from(await value.arrayBuffer()) });
      }
    } else {
      if (!path) throw invalid('missing the path query parameter');
      files.push({ path, data: body });
    }
    if (files.length === 0) throw invalid('the upload holds no file');
    const written = [];
    for (const f of files) {
      const { entry } = await sandbox.fs(FsWriteCommand.type, {
        path: sandbox.path(f.path),
        data: f.data.toString('base64'),
      });
      written.push({ name: entry.name, type: 'file', path: fromWorkspace(entry.path, sandbox.workspacePath) });
    }
    sendJson(res, 200, written);
  }

  private gunzip(body: Buffer): Buffer {
    try {
      const out = gunzipSync(body, { maxOutputLength: this.maxBytes });
      return out;
    } catch (err) {
      throw invalid(`the gzip body does not decompress within ${this.maxBytes} bytes: ${(err as Error).message}`);
    }
  }
}
