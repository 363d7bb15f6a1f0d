set terminal pngcairo size 1100,420
set output "e2e.png"
set multiplot layout 1,2
set logscale x 2
set xlabel "prompt tokens P"
set grid
set key top left
set title "decode tok/s, one sequence / full cache"
plot "e2e.dat" index 0 using 1:2 with linespoints title "keyformer:50%", "e2e.dat" index 1 using 1:2 with linespoints title "h2o:50%", "e2e.dat" index 2 using 1:2 with linespoints title "streaming:50%", "e2e.dat" index 3 using 1:2 with linespoints title "keyformer:20%", "e2e.dat" index 4 using 1:2 with linespoints title "h2o:20%", "e2e.dat" index 5 using 1:2 with linespoints title "streaming:20%", 1 with lines dashtype 2 lc rgb 'black' title 'full'
set title "batch tok/s at a fixed KV memory / full cache"
plot "e2e.dat" index 0 using 1:3 with linespoints title "keyformer:50%", "e2e.dat" index 1 using 1:3 with linespoints title "h2o:50%", "e2e.dat" index 2 using 1:3 with linespoints title "streaming:50%", "e2e.dat" index 3 using 1:3 with linespoints title "keyformer:20%", "e2e.dat" index 4 using 1:3 with linespoints title "h2o:20%", "e2e.dat" index 5 using 1:3 with linespoints title "streaming:20%", 1 with lines dashtype 2 lc rgb 'black' title 'full'
unset multiplot
