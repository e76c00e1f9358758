// The E2B daemon's file-system and process services (contract/e2b), which tether's
// E2B-compatible surface serves; generated like the rest by `buf generate`.
export * as envdFilesystem from './gen/filesystem/filesystem_pb';
export * as envdProcess from './gen/process/process_pb';
