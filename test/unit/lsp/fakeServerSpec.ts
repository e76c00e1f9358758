import * as path from 'node:path';
import type { ServerSpec } from '../../../runner/src/tools/lsp/servers';

/** The scripted language server of fakeServer.ts, as a server the supervisor can start. */
export const FAKE_SERVER: ServerSpec = {
  id: 'fake',
  languages: 'Fake',
  extensions: { '.fake': 'fake' },
  rootMarkers: ['fake.json'],
  command: path.basename(process.execPath),
  args: [path.join(__dirname, 'fakeServer.js')],
};
