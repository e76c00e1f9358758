// The client lives in clients/typescript (@tether/client); this re-export keeps older imports
// of gateway/src/client compiling. New code imports clients/typescript/src.
export * from '../../clients/typescript/src';
