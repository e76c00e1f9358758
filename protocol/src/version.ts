/** The version of tether this build is: one source, checked against VERSION and the package manifests by a unit test. */
export const TETHER_VERSION = '0.1.0';
