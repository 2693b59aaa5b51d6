// The program stale.md quotes from. It is never built: doc_check's ```cpp check only
// requires every line of a ```cpp block beside it to be one of these lines.
int reclaimed_percent() { return 12; }
