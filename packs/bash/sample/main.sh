#!/usr/bin/env bash
# shellcheck source=lib.sh
source ./lib.sh

greet world
greet again
