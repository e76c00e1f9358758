" Functions of the sample plugin, loaded on first use.

function! sample#greet(name) abort
  return 'hello, ' . a:name
endfunction
