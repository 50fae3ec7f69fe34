// Placeholder: filled in by the foundation work (issue 2).
#include "burst/attention.h"
