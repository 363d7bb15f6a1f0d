set terminal pngcairo size 900,600 noenhanced font ",10"
set grid
set key left top
set datafile missing '?'
set logscale xy
set xlabel 'retained tokens n'
set ylabel 'time per decode step (µs)'
set output 'decode_time_float_d128_g1.png'
set title 'Decode step time, float KV, d=128, g=1, 8 KV heads (log-log)'
plot 'decode_float_d128_g1.dat' using 1:2 with linespoints title 'Attention', 'decode_float_d128_g1.dat' using 1:3 with linespoints title 'Keyformer', 'decode_float_d128_g1.dat' using 1:4 with linespoints title 'H2O', 'decode_float_d128_g1.dat' using 1:5 with linespoints title 'StreamingLLM', 'decode_float_d128_g1.dat' using 1:6 with linespoints title 'Window', 'decode_float_d128_g1.dat' using 1:7 with linespoints title 'TOVA', 'decode_float_d128_g1.dat' using 1:8 with linespoints title 'Naive'
set logscale x
unset logscale y
set logscale y
set ylabel 'eviction / attention'
set output 'ratio_evict_over_attention_float_d128_g1.png'
set title 'Eviction / attention, float KV, d=128, g=1'
plot 'ratio_float_d128_g1.dat' using 1:2 with linespoints title 'Keyformer', 'ratio_float_d128_g1.dat' using 1:3 with linespoints title 'H2O', 'ratio_float_d128_g1.dat' using 1:4 with linespoints title 'StreamingLLM', 'ratio_float_d128_g1.dat' using 1:5 with linespoints title 'Window', 'ratio_float_d128_g1.dat' using 1:6 with linespoints title 'TOVA'
set ylabel 'naive / kvevict (Keyformer)'
set output 'ratio_naive_over_ours_float_d128_g1.png'
set title 'Naive step / kvevict Keyformer step, float KV, d=128, g=1'
plot 'ratio_float_d128_g1.dat' using 1:7 with linespoints title 'naive / ours'
