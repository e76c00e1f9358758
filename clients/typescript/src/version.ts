/** The version of this client and of the tether.v1 contract it speaks (the repository's VERSION). */
export const VERSION = '0.1.0';
