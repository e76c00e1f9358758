" Commands of the sample plugin.

command! Greet echo sample#greet('world')
command! GreetAgain echo sample#greet('again')
